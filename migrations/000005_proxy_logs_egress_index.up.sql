-- The (provider, connection_id, ts DESC) index cost about a third of the
-- database's CPU per request-log row (new rows land inside every
-- connection's key range, not at the index's end), and its one indexed
-- lookup is the egress sibling query of docs/cooldowns.md#egress-buckets, which only reads rows that
-- carry an egress IP. A partial index on those rows serves it; the other
-- readers (per-connection history in the management API, incident export)
-- go by time through idx_pl_timestamp (docs/store.md).
DROP INDEX IF EXISTS idx_pl_provider_connection_ts;
CREATE INDEX IF NOT EXISTS idx_pl_egress ON proxy_logs (provider, connection_id, ts) WHERE egress_ip IS NOT NULL;
