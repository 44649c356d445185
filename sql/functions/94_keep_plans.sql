-- Before PostgreSQL 18, every SQL-language function of jobfeed's that the
-- planner never inlines keeps its statements' plans as PL/pgSQL
-- (keep_plans_before_18): those with settings of their own or security definer,
-- and those below: a function of one value with a FROM, a sub-select or an
-- aggregate is not inlined either, nor a set-returning one called with a
-- sub-select (get_jobs' call of queue_positions).
-- Inlined helpers are left as they are. On 18 this does nothing. Run after the
-- files that define them, before 95_no_jit.sql (which turns JIT off under the
-- settings this adds).
select jobfeed.keep_plans_before_18(p.oid)
  from pg_proc p
 where p.pronamespace = 'jobfeed'::regnamespace
   and p.prolang = (select l.oid from pg_language l where l.lanname = 'sql')
   and (p.proconfig is not null or p.prosecdef
        or p.oid in ('jobfeed.queue_position'::regproc, 'jobfeed.reusable'::regproc,
                     'jobfeed.batch_first_target_held'::regproc, 'jobfeed.batch_problem'::regproc,
                     'jobfeed.may_set_clock'::regproc, 'jobfeed.notify_requesters'::regproc,
                     'jobfeed.queue_positions'::regproc));
