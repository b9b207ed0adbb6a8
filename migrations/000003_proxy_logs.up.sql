-- Request log, one row per upstream attempt (docs/store.md#request-log), written behind in
-- batches. Never prompts or completions: error_body is the first 2 KB of an
-- error body with anything that looks like a key redacted.
CREATE TABLE proxy_logs (
    id             bigserial   PRIMARY KEY,
    ts             timestamptz NOT NULL,
    request_id     text        NOT NULL DEFAULT '',
    provider       text        NOT NULL DEFAULT '',
    connection_id  text        NOT NULL DEFAULT '',
    model          text        NOT NULL DEFAULT '',
    status         integer     NOT NULL DEFAULT 0,
    latency_ms     bigint      NOT NULL DEFAULT 0,
    first_byte_ms  bigint,
    error_type     text        NOT NULL DEFAULT '',
    reason         text        NOT NULL DEFAULT '',
    egress_ip      text,
    headers        jsonb       NOT NULL DEFAULT '{}',
    error_body     text        NOT NULL DEFAULT ''
);

-- Incident export and retention (by time).
CREATE INDEX idx_pl_timestamp ON proxy_logs (ts);
-- Per connection history, and the last known egress IP of each connection of
-- a provider in the last 24 h (docs/cooldowns.md#egress-buckets).
CREATE INDEX idx_pl_provider_connection_ts ON proxy_logs (provider, connection_id, ts DESC);
CREATE INDEX idx_pl_request_id ON proxy_logs (request_id) WHERE request_id <> '';
