DROP TABLE IF EXISTS exclusive_connection_leases;
