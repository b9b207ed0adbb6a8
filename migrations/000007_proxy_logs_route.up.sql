-- The route each logged attempt served: the model the client asked for (a
-- combo id, an alias or provider/model), so an incident export replays a
-- combo request as a request to the combo even when its first target
-- answered (docs/incident.md). '' for rows written before the column.
ALTER TABLE proxy_logs ADD COLUMN IF NOT EXISTS route text NOT NULL DEFAULT '';
