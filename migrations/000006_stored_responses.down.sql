DROP INDEX IF EXISTS idx_stored_responses_expires;
DROP TABLE IF EXISTS stored_responses;
