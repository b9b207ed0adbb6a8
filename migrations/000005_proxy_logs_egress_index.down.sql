DROP INDEX IF EXISTS idx_pl_egress;
CREATE INDEX IF NOT EXISTS idx_pl_provider_connection_ts ON proxy_logs (provider, connection_id, ts DESC);
