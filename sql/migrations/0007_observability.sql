-- Observability: the workers that are alive, for the dashboard and `jobfeed top`.
-- Each worker process upserts its row on every beat (jobfeed.worker_beat) and
-- deletes it when it stops cleanly; a row not renewed for two leases is a lost
-- worker. Also adds jobfeed.job_timings (sql/functions/40_claim.sql), which
-- workers read after each claim for their wait and end-to-end histograms.
create table jobfeed.workers (
    id          text primary key,
    host        text not null,
    kinds       text[] not null,
    concurrency int not null,
    running     int not null default 0,
    lease       interval not null,
    started_at  timestamptz not null default now(),
    last_seen   timestamptz not null default now()
);
