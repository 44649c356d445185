-- Files in and out of band: a job's inputs (uploaded with its submission) and
-- outputs (saved by its handler), too large for a jsonb payload or result.
--
-- Chunked bytea rows rather than large objects: rows follow the job by a
-- foreign key (the sweeper's delete cascades; nothing is orphaned), the
-- service roles reach them only through functions as they do every table
-- (large objects have their own ACLs and need lo_unlink or vacuumlo), and a
-- range is a primary-key probe plus substring().

create table jobfeed.job_files (
    id           bigint generated always as identity primary key,
    -- null only inside the transaction of the upload that stages it (then
    -- attached to its job, or discarded): never committed so
    job_id       uuid references jobfeed.jobs (id) on delete cascade,
    direction    text not null check (direction in ('in', 'out')),
    name         text not null check (octet_length(name) between 1 and 200),
    content_type text not null check (octet_length(content_type) between 1 and 200),
    chunk_size   int not null check (chunk_size > 0),  -- every chunk but the last holds this many bytes
    size         bigint check (size >= 0),             -- null while being written: invisible
    generation   int not null default 0,               -- an output's attempt (fencing)
    created_at   timestamptz not null default now()
);
-- one finished file per (job, direction, name); also the cascade's index
create unique index job_files_name on jobfeed.job_files (job_id, direction, name) where size is not null;
create index job_files_job on jobfeed.job_files (job_id);
revoke all on jobfeed.job_files from public;

create table jobfeed.file_chunks (
    file_id bigint not null references jobfeed.job_files (id) on delete cascade,
    seq     int not null check (seq >= 0),
    data    bytea not null,
    primary key (file_id, seq)
);
-- Out of line, uncompressed: uploads are mostly compressed media already, and
-- substring() of an uncompressed TOAST value reads only the slices it needs.
alter table jobfeed.file_chunks alter column data set storage external;
revoke all on jobfeed.file_chunks from public;

-- The public list of outputs, [{"name", "size", "content_type"}], kept on the
-- row so that public_view stays a function of the row alone.
alter table jobfeed.jobs add column outputs jsonb;
