-- Responses-API responses the gateway stores for previous_response_id and
-- GET /v1/responses/{id} (docs/surfaces.md), shared by every replica on
-- the database. turns is the conversation as chat messages (JSON); object
-- the response as the client got it. Rows past expires_at are never read
-- and are pruned as new ones are written.
CREATE TABLE IF NOT EXISTS stored_responses (
    id         text PRIMARY KEY,
    key_id     text NOT NULL,
    turns      bytea NOT NULL,
    object     bytea NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_stored_responses_expires ON stored_responses (expires_at);
