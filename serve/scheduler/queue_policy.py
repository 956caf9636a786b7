"""Queue policies per priority level, read from dynamic_batching (Triton's semantics)."""

from __future__ import annotations

from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2 as mc


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """One priority level's queue policy (Triton's ModelQueuePolicy); the defaults are
    dynamic_batching's with no policy given: unbounded, no timeout, REJECT."""

    max_queue_size: int = 0  # 0: unbounded
    default_timeout_us: int = 0  # 0: no timeout
    allow_timeout_override: bool = False
    delay_on_timeout: bool = False  # timeout_action DELAY instead of REJECT

    @classmethod
    def from_proto(cls, policy: mc.ModelQueuePolicy) -> QueuePolicy:
        return cls(
            max_queue_size=policy.max_queue_size,
            default_timeout_us=policy.default_timeout_microseconds,
            allow_timeout_override=policy.allow_timeout_override,
            delay_on_timeout=policy.timeout_action == mc.ModelQueuePolicy.DELAY,
        )

    def timeout_us(self, requested_us: int | None) -> int:
        """The request's queue timeout: an allowed override may shorten the default, never
        lengthen it, and with no default timeout there is nothing to shorten (as Triton)."""
        if (
            requested_us is not None
            and self.allow_timeout_override
            and requested_us < self.default_timeout_us
        ):
            return requested_us
        return self.default_timeout_us


@dataclass(frozen=True, slots=True)
class BatchingPolicy:
    """What the batcher needs from the config, resolved once at load."""

    enabled: bool
    max_batch_size: int
    preferred_sizes: tuple[int, ...]
    max_queue_delay_us: int
    preserve_ordering: bool
    priority_levels: int  # 0: a single level
    default_priority_level: int
    level_policies: tuple[QueuePolicy, ...]  # index 0 = priority level 1 (or the only level)

    @classmethod
    def from_config(cls, config: mc.ModelConfig) -> BatchingPolicy:
        if not config.HasField("dynamic_batching"):
            return cls(False, config.max_batch_size, (), 0, False, 0, 0, (QueuePolicy(),))
        batching = config.dynamic_batching
        default = QueuePolicy.from_proto(batching.default_queue_policy)
        levels = batching.priority_levels
        policies = tuple(
            QueuePolicy.from_proto(batching.priority_queue_policy[level])
            if level in batching.priority_queue_policy
            else default
            for level in range(1, max(levels, 1) + 1)
        )
        return cls(
            enabled=True,
            max_batch_size=config.max_batch_size,
            preferred_sizes=tuple(sorted(set(batching.preferred_batch_size))),
            max_queue_delay_us=batching.max_queue_delay_microseconds,
            preserve_ordering=batching.preserve_ordering,
            priority_levels=levels,
            default_priority_level=batching.default_priority_level if levels else 1,
            level_policies=policies,
        )

    def level_index(self, priority: int) -> int:
        """Queue index for a request's `priority` parameter (0 or out of range: the default)."""
        if self.priority_levels == 0:
            return 0
        if 1 <= priority <= self.priority_levels:
            return priority - 1
        return self.default_priority_level - 1
