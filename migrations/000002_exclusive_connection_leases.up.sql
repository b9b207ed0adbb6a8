-- Exclusive session leases (docs/leases.md, docs/leases.md#the-database-arbitrates). The database is
-- the arbiter: the two unique partial indexes make a second ACTIVE lease on a
-- connection, or a second ACTIVE lease of one owner, impossible whatever the
-- application does. Only the SHA-256 hex of an owner token is stored.
CREATE TABLE exclusive_connection_leases (
    id                bigserial   PRIMARY KEY,
    lease_owner_hash  text        NOT NULL,
    api_key_id        text        NOT NULL,
    provider          text        NOT NULL,
    connection_id     text        NOT NULL,
    model             text        NOT NULL DEFAULT '',
    generation        bigint      NOT NULL,
    state             text        NOT NULL,   -- ACTIVE | RELEASED | EXPIRED | INVALIDATED
    acquired_at       timestamptz NOT NULL,
    renewed_at        timestamptz NOT NULL,
    expires_at        timestamptz NOT NULL,
    ended_at          timestamptz,
    end_reason        text,
    CONSTRAINT exclusive_lease_state_valid
        CHECK (state IN ('ACTIVE', 'RELEASED', 'EXPIRED', 'INVALIDATED')),
    CONSTRAINT exclusive_lease_owner_hash_is_sha256
        CHECK (lease_owner_hash ~ '^[0-9a-f]{64}$'),
    CONSTRAINT exclusive_lease_generation_positive CHECK (generation > 0)
);

CREATE UNIQUE INDEX idx_exclusive_lease_active_owner
    ON exclusive_connection_leases (lease_owner_hash) WHERE state = 'ACTIVE';
CREATE UNIQUE INDEX idx_exclusive_lease_active_connection
    ON exclusive_connection_leases (provider, connection_id) WHERE state = 'ACTIVE';
-- generation = max(previous generations of the owner) + 1
CREATE INDEX idx_exclusive_lease_owner_generation
    ON exclusive_connection_leases (lease_owner_hash, generation);
-- the expiry sweep every operation runs first
CREATE INDEX idx_exclusive_lease_active_expires
    ON exclusive_connection_leases (expires_at) WHERE state = 'ACTIVE';
