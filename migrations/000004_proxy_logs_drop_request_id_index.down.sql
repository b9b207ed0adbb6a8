CREATE INDEX idx_pl_request_id ON proxy_logs (request_id) WHERE request_id <> '';
