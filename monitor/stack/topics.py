"""The topics of the embedded stack: created at start, existing ones kept."""

from __future__ import annotations

from monitor.config import Settings
from monitor.core.errors import InfraError


async def create_topics(settings: Settings) -> None:
    """Create the events topic (``topic_partitions``) and the DLQ topic; existing ones are kept."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import TopicAlreadyExistsError, for_code

    assert settings.kafka_bootstrap
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    try:
        response = await admin.create_topics(
            [
                NewTopic(settings.topic_events, settings.topic_partitions, 1),
                NewTopic(settings.topic_dlq, 1, 1),
            ]
        )
    finally:
        await admin.close()
    for topic, code, *rest in response.topic_errors:
        error = for_code(code)
        if code and error is not TopicAlreadyExistsError:
            raise InfraError(f"cannot create topic {topic}: {error.__name__} {rest}")
