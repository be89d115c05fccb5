"""The judge loop the worker runs, assembled from the settings: which judges, which domains,
which topic and consumer group (``monitor.worker.services`` calls :func:`build_loop`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from monitor.config import Settings
from monitor.judges.base import Verdict
from monitor.judges.deterministic import deterministic_judges
from monitor.judges.domains import load_domains
from monitor.judges.llm import LLMJudge, LLMJudgeConfig
from monitor.judges.runner import JudgeRunner
from monitor.judges.worker import JudgeConfig, JudgeLoop
from monitor.otel.evaluation_export import EvaluationExporter, otlp_headers
from monitor.sampling.rules import AlwaysSampleRules
from monitor.telemetry.ops_metrics import OpsMetrics

log = logging.getLogger("monitor.judging")


def build_loop(settings: Settings, metrics: OpsMetrics, rules: AlwaysSampleRules) -> JudgeLoop:
    """The judge loop the worker runs: deterministic judges always (with the domains of the
    ``monitor.domains`` entry points and ``domains_dir``), the LLM judge when
    ``llm_judge_base_url`` is set (model, key, timeout from the settings)."""
    llm = None
    if settings.llm_judge_base_url:
        llm = LLMJudge(
            LLMJudgeConfig(
                base_url=settings.llm_judge_base_url,
                model=settings.llm_judge_model,
                api_key=settings.llm_judge_api_key,
                timeout=settings.llm_judge_timeout_s,
                max_concurrency=settings.judge_concurrency,
                json_mode=settings.llm_judge_json_mode,
            )
        )
    assert settings.kafka_bootstrap and settings.database_url
    config = JudgeConfig(
        bootstrap=settings.kafka_bootstrap,
        database_url=settings.database_url,
        topic=settings.topic_judge_requests,
        group_id=settings.judge_consumer_group,
        idle_s=settings.judge_idle_s,
        arrival_idle_s=settings.judge_arrival_idle_s,
        rejudge_most=settings.judge_rejudge_most,
        rejudge_gap_s=settings.judge_rejudge_gap_s,
        schedule_interval_s=settings.judge_schedule_interval_s,
        schedule_batch=settings.judge_batch,
        concurrency=settings.judge_concurrency,
        idempotent_producer=settings.kafka_idempotent,
        precision_floor=settings.judge_precision_floor,
        floor_min_pairs=settings.judge_floor_min_pairs,
        quality_interval_s=settings.judge_quality_interval_s,
        max_events=settings.judge_max_events,
        time_budget_s=settings.judge_time_budget_s,
        resend_after_s=settings.judge_resend_after_s,
        resend_most=settings.judge_resend_most,
    )
    domains = load_domains(settings.domains_dir)
    log.info(
        "judge domains: %s",
        ", ".join(f"{n} ({len(d.references)} references)" for n, d in sorted(domains.items()))
        or "none",
    )
    runner = JudgeRunner(deterministic_judges(), llm, domains)
    loop = JudgeLoop(config, runner, rules, metrics)
    if settings.otel_evaluations_endpoint:
        loop.verdict_sink = evaluation_sink(settings, metrics)
    return loop


def evaluation_sink(
    settings: Settings, metrics: OpsMetrics
) -> Callable[[list[Verdict]], Awaitable[bool]]:
    """Export verdicts to ``otel_evaluations_endpoint`` and count the outcome."""
    assert settings.otel_evaluations_endpoint
    exporter = EvaluationExporter(
        settings.otel_evaluations_endpoint, otlp_headers(settings.otel_evaluations_headers)
    )

    async def sink(verdicts: list[Verdict]) -> bool:
        ok = await exporter.export(verdicts)
        metrics.evaluations_exported.labels("ok" if ok else "failed").inc(len(verdicts))
        return ok

    return sink
