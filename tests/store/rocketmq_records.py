"""CommitLog records as RocketMQ 4.9's CommitLog writes them, laid out field by field from its
published format (not through Wharf's encoder): masked body CRC, IPv4 or IPv6 hosts, the properties
exactly as given (RocketMQ 4.9.1 and later leave out the separator after the last pair)."""

from __future__ import annotations

import socket
import struct
import zlib
from dataclasses import dataclass

NOW_MS = 1_700_000_000_000

# RocketMQ's MessageSysFlag: BORNHOST_V6_FLAG and STOREHOSTADDRESS_V6_FLAG.
BORNHOST_V6_FLAG = 0x10
STOREHOST_V6_FLAG = 0x20


@dataclass(frozen=True)
class Host:
    address: str  # dotted IPv4 or IPv6 text
    port: int

    def packed(self) -> bytes:
        """4 address bytes + port for IPv4, 16 + port for IPv6, as RocketMQ's
        MessageExt.socketAddress2ByteBuffer puts them."""
        family = socket.AF_INET6 if ":" in self.address else socket.AF_INET
        return socket.inet_pton(family, self.address) + struct.pack(">i", self.port)

    @property
    def v6(self) -> bool:
        return ":" in self.address


BORN_V4 = Host("192.168.0.7", 50123)
STORE_V4 = Host("10.1.2.3", 10911)
BORN_V6 = Host("2001:db8::7", 50123)
STORE_V6 = Host("fe80::1:2:3", 10911)


def rocketmq_record(
    properties: bytes,
    body: bytes = b'{"id": 7}',
    physical_offset: int = 4096,
    *,
    topic: bytes = b"orders",
    queue_id: int = 3,
    queue_offset: int = 11,
    born: Host = BORN_V4,
    store: Host = STORE_V4,
    born_timestamp: int = NOW_MS - 5,
    store_timestamp: int = NOW_MS,
    reconsume_times: int = 0,
    flag: int = 0,
) -> bytes:
    """One record: TOTALSIZE, MAGICCODE, BODYCRC, QUEUEID, FLAG, QUEUEOFFSET, PHYSICALOFFSET,
    SYSFLAG, BORNTIMESTAMP, BORNHOST, STORETIMESTAMP, STOREHOST, RECONSUMETIMES,
    PREPAREDTRANSACTIONOFFSET, BODY, TOPIC, PROPERTIES (RocketMQ 4.9's CommitLog.calMsgLength)."""
    sysflag = (BORNHOST_V6_FLAG if born.v6 else 0) | (STOREHOST_V6_FLAG if store.v6 else 0)
    born_host, store_host = born.packed(), store.packed()
    total = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + len(born_host) + 8 + len(store_host) + 4 + 8
    total += 4 + len(body) + 1 + len(topic) + 2 + len(properties)
    return b"".join(
        (
            struct.pack(
                ">iIiiiqqi",
                total,
                0xDAA320A7,
                zlib.crc32(body) & 0x7FFFFFFF,
                queue_id,
                flag,
                queue_offset,
                physical_offset,
                sysflag,
            ),
            struct.pack(">q", born_timestamp),
            born_host,
            struct.pack(">q", store_timestamp),
            store_host,
            struct.pack(">iqi", reconsume_times, 0, len(body)),
            body,
            bytes([len(topic)]),
            topic,
            struct.pack(">h", len(properties)),
            properties,
        )
    )
