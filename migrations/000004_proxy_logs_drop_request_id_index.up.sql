-- The request log is never looked up by request id (incident export and the
-- management API read by time, provider and connection), and that index was
-- the costliest one to keep: random keys, one insert per proxied attempt.
DROP INDEX IF EXISTS idx_pl_request_id;
