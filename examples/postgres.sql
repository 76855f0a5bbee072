-- The tables of leaderrun's PostgreSQL backend (--backend postgres), for a
-- DBA who creates them ahead of time. leaderrun creates the same objects
-- itself when they are missing and its role may. The names below are the
-- defaults (--pg-schema public, --pg-table leaderrun_leases); with others,
-- replace them everywhere: the sequence, the runs, terms and control tables
-- take the table's name plus _epoch, _runs, _terms and _control.

-- One row per key: the holder, the observer-clock contract and TTL it
-- declares, its epoch, and a version every write replaces.
CREATE TABLE IF NOT EXISTS "public"."leaderrun_leases" (
	key        text PRIMARY KEY,
	term       text NOT NULL,
	holder     text NOT NULL,
	contract   text NOT NULL,
	ttl_ms     bigint NOT NULL,
	epoch      bigint NOT NULL,
	version    text NOT NULL,
	renewed_at timestamptz NOT NULL
);

-- Every acquire takes its epoch (the fencing token) from this sequence in
-- the same statement. Never reset it: epochs must only grow.
CREATE SEQUENCE IF NOT EXISTS "public"."leaderrun_leases_epoch" AS bigint;

-- Once-per records (--once-per, --run-id).
CREATE TABLE IF NOT EXISTS "public"."leaderrun_leases_runs" (
	key     text NOT NULL,
	slot    text NOT NULL,
	record  text NOT NULL,
	at      timestamptz NOT NULL,
	expires timestamptz NOT NULL,
	PRIMARY KEY (key, slot)
);

-- The history (leaderrun history KEY): one row per term, the newest
-- --history-keep per key; each record replaces its own row and deletes the
-- key's rows beyond that. Optional for leading: without it (and without
-- the right to create it) only history fails.
CREATE TABLE IF NOT EXISTS "public"."leaderrun_leases_terms" (
	key    text NOT NULL,
	epoch  bigint NOT NULL,
	record text NOT NULL,
	PRIMARY KEY (key, epoch)
);

-- The operator's control records (leaderrun pause, resume, step-down,
-- --priority): one row per key, shared by its --holders slots, with a
-- version every write advances. Optional for leading: without it a
-- candidate reads no control record, and only writing one fails.
CREATE TABLE IF NOT EXISTS "public"."leaderrun_leases_control" (
	key     text PRIMARY KEY,
	record  text NOT NULL,
	version bigint NOT NULL
);

-- What leaderrun's role needs, and no more (replace leaderrun_role):
-- GRANT USAGE ON SCHEMA "public" TO leaderrun_role;
-- GRANT SELECT, INSERT, UPDATE ON "public"."leaderrun_leases" TO leaderrun_role;
-- GRANT USAGE ON SEQUENCE "public"."leaderrun_leases_epoch" TO leaderrun_role;
-- GRANT SELECT, INSERT, UPDATE, DELETE ON "public"."leaderrun_leases_runs" TO leaderrun_role;
-- GRANT SELECT, INSERT, UPDATE, DELETE ON "public"."leaderrun_leases_terms" TO leaderrun_role;
-- GRANT SELECT, INSERT, UPDATE ON "public"."leaderrun_leases_control" TO leaderrun_role;
