-- postgres-fence.sql: fence a job's writes to PostgreSQL with its
-- LEADER_EPOCH. See docs/FENCING.md.
--
-- leaderrun_fence keeps, per key, the highest epoch that has written. A job
-- calls leaderrun_fence(key, epoch) first in the transaction that does its
-- writes:
--
--   BEGIN;
--   SELECT leaderrun_fence('billing', 1234);   -- LEADER_KEY, LEADER_EPOCH
--   UPDATE invoices SET sent = true WHERE ...;
--   COMMIT;
--
-- The call raises an error (SQLSTATE LR409) when a higher epoch has
-- written, so the transaction aborts and none of its writes land. When the
-- epoch is current it raises the fence to it, and the fence's row stays
-- locked until the transaction ends: a transaction of another epoch waits
-- for this one to commit or roll back, then finds the fence where this one
-- left it. The fenced writes and the fence commit together or not at all.
-- Epochs are bigint: every leaderrun backend's epochs fit.

CREATE TABLE IF NOT EXISTS leaderrun_fence (
    key   text PRIMARY KEY,
    epoch bigint NOT NULL
);

CREATE OR REPLACE FUNCTION leaderrun_fence(fence_key text, fence_epoch bigint)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    -- Raise the fence, or lock it as it is when it is already higher: the
    -- row is locked either way, and FOUND says whether it was raised.
    INSERT INTO leaderrun_fence AS f (key, epoch)
    VALUES (fence_key, fence_epoch)
    ON CONFLICT (key) DO UPDATE
        SET epoch = EXCLUDED.epoch
        WHERE f.epoch <= EXCLUDED.epoch;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'leaderrun fence: epoch % of key % is stale: a higher epoch has written', fence_epoch, fence_key
            USING ERRCODE = 'LR409',
                  HINT = 'this job no longer leads; stop without writing';
    END IF;
END;
$$;
