"""Record batches as no producer would send them, appended to and read from a real broker."""

from __future__ import annotations

import struct

from aiokafka import AIOKafkaClient, TopicPartition
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.produce import ProduceRequest
from aiokafka.record.default_records import DefaultRecordBase, DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c

from monitor.consume.batch_scan import codec_of

CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
HEADER = DefaultRecordBase.HEADER_STRUCT.size


def record_batch(vals: list[bytes], codec: str, damage: str) -> bytes:
    """A v2 record batch of ``vals`` compressed with ``codec``, then damaged: ``payload`` flips
    bytes of the compressed records (the CRC recomputed, so only decompression fails),
    ``crc`` flips one byte after the CRC was computed, ``none`` leaves it whole."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=CODEC_IDS[codec],
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i, v in enumerate(vals):
        builder.append(i, timestamp=None, key=b"k", value=v, headers=[])
    buf = bytearray(builder.build())
    if damage == "payload":
        for i in range(HEADER + 4, min(len(buf), HEADER + 40)):
            buf[i] ^= 0x5A
        crc = calc_crc32c(memoryview(buf)[DefaultRecordBase.ATTRIBUTES_OFFSET :])
        struct.pack_into(">I", buf, DefaultRecordBase.CRC_OFFSET, crc)
    elif damage == "crc":
        buf[-1] ^= 0xFF
    return bytes(buf)


class Raw:
    """Produce and fetch raw record batches of one topic (what no producer would send)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.client = AIOKafkaClient(bootstrap_servers=bootstrap)
        self.topic = topic

    async def __aenter__(self) -> Raw:
        await self.client.bootstrap()
        await self.client._wait_on_metadata(self.topic)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.close()

    def _leader(self, partition: int) -> int:
        return int(self.client.cluster.leader_for_partition(TopicPartition(self.topic, partition)))

    async def produce(self, batch: bytes, partition: int = 0) -> int:
        """Append ``batch`` as it is; returns its base offset."""
        request = ProduceRequest(None, -1, 30000, [(self.topic, [(partition, batch)])])
        response = await self.client.send(self._leader(partition), request)
        ((_, parts),) = response.topics
        _partition, error, base, *_ = parts[0]
        assert error == 0, f"the broker refused the batch: error {error}"
        return int(base)

    async def batches(self, partition: int = 0) -> list[tuple[int, str]]:
        """(base offset, codec) of every batch the broker holds for ``partition``."""
        part = (partition, 0, 1 << 24)
        request = FetchRequest(100, 1, 1 << 24, 0, [(self.topic, [part])])
        response = await self.client.send(self._leader(partition), request)
        ((_, parts),) = response.topics
        data = bytes(parts[0][-1])
        out, pos = [], 0
        while pos + 12 <= len(data):
            base, length = struct.unpack_from(">qi", data, pos)
            out.append((base, codec_of(data[pos : pos + 12 + length])))
            pos += 12 + length
        return out
