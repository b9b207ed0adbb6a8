-- Resilience state written behind by the store (docs/store.md).
--
-- Every entity table carries:
--   version    the state_version_seq value of the flush that last wrote the
--              row; a replica writes straight through only when the row still
--              has the version it last saw, otherwise it merges (docs/store.md
--              "Conflicts").
--   changed_at the model time of the change that produced the value.
--   updated_by the replica (origin id) that wrote it.
-- Typed columns are a projection for operators and SQL; the jsonb column, when
-- there is one, holds the full model value and is what a restore reads.
-- Enumerations are plain text without CHECK constraints on purpose: a row an
-- older binary cannot read is reported and skipped at load, never a crash.

CREATE SEQUENCE state_version_seq;

CREATE TABLE domain_circuit_breakers (
    name              text        PRIMARY KEY,          -- provider id
    state             text        NOT NULL DEFAULT 'CLOSED',
    failure_count     integer     NOT NULL DEFAULT 0,
    last_failure_time timestamptz,
    last_failure_kind text        NOT NULL DEFAULT '',
    opened_at         timestamptz,
    open_cycles       integer     NOT NULL DEFAULT 0,
    generation        bigint      NOT NULL DEFAULT 0,
    breaker           jsonb       NOT NULL,              -- model.Breaker
    version           bigint      NOT NULL,
    changed_at        timestamptz,
    updated_at        timestamptz NOT NULL DEFAULT now(),
    updated_by        text        NOT NULL DEFAULT ''
);

CREATE TABLE provider_cooldown_windows (
    provider    text        PRIMARY KEY,
    cool_until  timestamptz,
    failures    jsonb       NOT NULL DEFAULT '[]',       -- failure instants, ms since epoch
    version     bigint      NOT NULL,
    changed_at  timestamptz,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    updated_by  text        NOT NULL DEFAULT ''
);

-- Round-robin cursors: kind 'provider' (connections of a provider) or 'combo'.
CREATE TABLE routing_cursors (
    kind        text        NOT NULL,
    name        text        NOT NULL,
    cursor      bigint      NOT NULL DEFAULT 0,
    version     bigint      NOT NULL,
    changed_at  timestamptz,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    updated_by  text        NOT NULL DEFAULT '',
    PRIMARY KEY (kind, name)
);

CREATE TABLE provider_connections (
    provider                 text        NOT NULL,
    connection_id            text        NOT NULL,
    status                   text        NOT NULL DEFAULT 'active',
    rate_limited_until       timestamptz,
    cooldown_set_at          timestamptz,
    backoff_level            integer     NOT NULL DEFAULT 0,
    last_error               text        NOT NULL DEFAULT '',
    last_error_type          text        NOT NULL DEFAULT '',
    error_code               integer     NOT NULL DEFAULT 0,
    last_error_at            timestamptz,
    -- request-rejected and expired-retry streaks (docs/cooldowns.md#ladders)
    rejected_count           integer     NOT NULL DEFAULT 0,
    rejected_last_at         timestamptz,
    rejected_cooldown_until  timestamptz,
    expired_retry_count      integer     NOT NULL DEFAULT 0,
    expired_retry_at         timestamptz,
    uses                     bigint      NOT NULL DEFAULT 0,
    last_used_at             timestamptz,
    -- Shell-owned runtime fields, never written by the state flush.
    egress_ip                text,
    max_concurrent           integer,
    rate_limit_protection    boolean,
    conn                     jsonb       NOT NULL,       -- model.Conn
    version                  bigint      NOT NULL,
    changed_at               timestamptz,
    updated_at               timestamptz NOT NULL DEFAULT now(),
    updated_by               text        NOT NULL DEFAULT '',
    PRIMARY KEY (provider, connection_id)
);

-- Cooling connections, for dashboards and the cooldown manager.
CREATE INDEX idx_provider_connections_cooling
    ON provider_connections (rate_limited_until) WHERE rate_limited_until IS NOT NULL;

CREATE TABLE model_lockouts (
    provider         text        NOT NULL,
    connection_id    text        NOT NULL,
    lock_name        text        NOT NULL,               -- model id or family:<name>
    exact            boolean     NOT NULL DEFAULT false, -- exact provider/connection/model triple
    reason           text        NOT NULL DEFAULT '',
    until_at         timestamptz,
    locked_at        timestamptz,
    failure_count    integer     NOT NULL DEFAULT 0,
    last_failure_at  timestamptz,
    last_cooldown_ms bigint      NOT NULL DEFAULT 0,
    version          bigint      NOT NULL,
    changed_at       timestamptz,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    updated_by       text        NOT NULL DEFAULT '',
    PRIMARY KEY (provider, connection_id, lock_name, exact)
);

-- GET /api/resilience/model-cooldowns lists active lockouts.
CREATE INDEX idx_model_lockouts_until ON model_lockouts (until_at);

-- Saved settings (namespace 'settings', key 'resilience': a model.Layer).
CREATE TABLE key_value (
    namespace   text        NOT NULL,
    key         text        NOT NULL,
    value       jsonb       NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    updated_by  text        NOT NULL DEFAULT '',
    PRIMARY KEY (namespace, key)
);

-- Session affinity pins (docs/selection.md#session-affinity, model.Pin). session_hash is the opaque
-- session key the shell gives the model — a hash of the session header
-- (store.SessionHash); the session id itself is never stored.
CREATE TABLE session_affinity_pins (
    provider       text        NOT NULL,
    session_hash   text        NOT NULL,
    connection_id  text        NOT NULL,
    expires_at     timestamptz NOT NULL,
    version        bigint      NOT NULL,
    changed_at     timestamptz,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    updated_by     text        NOT NULL DEFAULT '',
    PRIMARY KEY (provider, session_hash)
);

CREATE INDEX idx_session_affinity_pins_expires ON session_affinity_pins (expires_at);

-- Change feed between replicas. Every flush appends one row per entity it
-- wrote, under pg_advisory_xact_lock(state_flush_lock), so seq order is commit
-- order and a reader that has seen seq N has seen everything before it.
-- payload is the written value (NULL = the entity was removed). A NOTIFY on
-- channel breakwater_state wakes readers; they also poll.
CREATE TABLE state_changes (
    seq            bigserial   PRIMARY KEY,
    version        bigint      NOT NULL,
    origin         text        NOT NULL,
    kind           text        NOT NULL,   -- breaker|window|cursor|connection|lockout|pin|settings
    provider       text        NOT NULL DEFAULT '',
    connection_id  text        NOT NULL DEFAULT '',
    name           text        NOT NULL DEFAULT '',
    exact          boolean     NOT NULL DEFAULT false,
    payload        jsonb,
    created_at     timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX idx_state_changes_created ON state_changes (created_at);

-- One row: every feed row with seq <= pruned_through may be gone; a reader
-- behind it reloads everything.
CREATE TABLE state_feed_meta (
    id              boolean PRIMARY KEY DEFAULT true CHECK (id),
    pruned_through  bigint  NOT NULL DEFAULT 0
);
INSERT INTO state_feed_meta (id, pruned_through) VALUES (true, 0);
