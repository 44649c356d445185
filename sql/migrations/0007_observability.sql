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

-- Queue depth by kind, sampled by the sweeper each round (jobfeed.sample_depth)
-- and kept two hours: the dashboard's depth chart over the last hour.
create table jobfeed.depth_samples (
    at      timestamptz not null,
    kind    text not null,
    queued  int not null,
    running int not null,
    primary key (at, kind)
);

-- The submitter's trace context (W3C traceparent), when it traced the submit:
-- each run of the job is a span in that trace (jobfeed[otel]).
alter table jobfeed.jobs add column traceparent text;
