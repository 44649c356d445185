-- The stats' counts of final states, kept apart in the snapshot: they read
-- every finished job kept, so stats_v2 recounts them less often than the rest
-- (when they were counted, and how long that took).
alter table jobfeed.stats_snapshot add column finished jsonb, add column finished_as_of timestamptz,
                                   add column finished_seconds float8;
