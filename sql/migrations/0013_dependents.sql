-- Only a job that something waits for (a job_deps row names it) has
-- dependents to settle when it ends. The trigger that settles them was
-- called for every job reaching a final state and looked job_deps up for
-- each: a fifth of what completing a job cost. A flag on the row lets the
-- trigger's WHEN pass over the rest without a call.
alter table jobfeed.jobs add column has_dependents boolean not null default false;

-- The flag's one rule, kept by the database whoever writes job_deps: a job
-- named by a job_deps row has has_dependents. (The writers in
-- sql/functions/ mark the jobs first, through hold_dependencies, so this
-- finds them marked; it is what holds for any other writer, the release
-- before's functions included.)
create function jobfeed.mark_dependency() returns trigger language plpgsql as $$
begin
    update jobfeed.jobs j set has_dependents = true where j.id = new.dep_id and not j.has_dependents;
    return null;
end $$;

create trigger job_deps_mark_dependency
    after insert or update of dep_id on jobfeed.job_deps
    for each row
    execute function jobfeed.mark_dependency();

-- The jobs already waited for (by key: job_deps is small, the jobs table may
-- hold a long history).
update jobfeed.jobs j set has_dependents = true
 where j.id in (select d.dep_id from jobfeed.job_deps d) and not j.has_dependents;

drop trigger jobs_settle_dependents on jobfeed.jobs;
create trigger jobs_settle_dependents
    after update of state on jobfeed.jobs
    for each row
    when (new.has_dependents and new.state in ('completed', 'failed', 'canceled')
          and old.state is distinct from new.state)
    execute function jobfeed.settle_dependents();
