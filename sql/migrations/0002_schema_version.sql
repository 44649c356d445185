-- Migrating is a deploy step: processes only read the schema's version, as
-- whichever service role they run as.
grant select on jobfeed.schema_version to jobfeed_api, jobfeed_worker, jobfeed_sweeper;

-- v0.1.0 processes migrate when they start: their bootstrap then re-applies
-- their function files whenever the checksum in this table differs from
-- theirs, which would put old bodies back over newer ones. This table takes
-- no row, so that transaction fails and rolls back, and the v0.1.0 process
-- stops at start with this constraint's name.
drop table if exists jobfeed.schema_functions;
create table jobfeed.schema_functions (
    id         int primary key,
    checksum   text,
    applied_at timestamptz,
    constraint "migrated by a newer jobfeed: upgrade this process" check (false)
);
