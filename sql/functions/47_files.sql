-- Files in and out of band (tables in migrations/0011_files.sql). A file is
-- written as chunks of chunk_size bytes (the last may be shorter), numbered
-- from 0, and becomes visible when finished (its size set).

-- An upload's file, staged inside the transaction that will submit its job
-- (file_attach), so that the job and its files commit together or not at all.
create or replace function jobfeed.file_stage(p_name text, p_content_type text, p_chunk_size int)
returns bigint language sql security definer set search_path = jobfeed, pg_temp as $$
    insert into jobfeed.job_files (direction, name, content_type, chunk_size)
    values ('in', p_name, p_content_type, p_chunk_size)
    returning id
$$;

-- One chunk of a file still being written (false: no such file, or finished).
create or replace function jobfeed.file_put(p_file bigint, p_seq int, p_data bytea)
returns boolean language plpgsql security definer set search_path = jobfeed, pg_temp as $$
begin
    insert into jobfeed.file_chunks (file_id, seq, data)
    select p_file, p_seq, p_data
     where exists (select from jobfeed.job_files f where f.id = p_file and f.size is null);
    return found;
end $$;

-- The staged files (with their sizes) belong to this job: a new one, never
-- claimed. A duplicate submission calls file_discard instead.
create or replace function jobfeed.file_attach(p_job uuid, p_files bigint[], p_sizes bigint[])
returns void language plpgsql security definer set search_path = jobfeed, pg_temp as $$
begin
    if not exists (select from jobfeed.jobs j where j.id = p_job and j.generation = 0) then
        perform jobfeed.raise_error('JF409', 'not_new', 'files attach only to a job that never started');
    end if;
    update jobfeed.job_files f set job_id = p_job, size = t.size
      from unnest(p_files, p_sizes) t(id, size)
     where f.id = t.id and f.job_id is null;
end $$;

create or replace function jobfeed.file_discard(p_files bigint[])
returns void language sql security definer set search_path = jobfeed, pg_temp as $$
    delete from jobfeed.job_files f where f.id = any (p_files) and f.job_id is null
$$;

-- An output the attempt (id, generation) starts writing; null when the job is
-- no longer running under that generation. An older attempt's unfinished
-- outputs, whatever their names, are garbage now (its worker died saving).
create or replace function jobfeed.output_begin(
    p_job uuid, p_generation int, p_name text, p_content_type text, p_chunk_size int)
returns bigint language plpgsql security definer set search_path = jobfeed, pg_temp as $$
declare
    v_id bigint;
begin
    if not exists (select from jobfeed.jobs j
                    where j.id = p_job and j.generation = p_generation and j.state::text = 'running') then
        return null;
    end if;
    delete from jobfeed.job_files f
     where f.job_id = p_job and f.direction = 'out' and f.size is null and f.generation < p_generation;
    insert into jobfeed.job_files (job_id, direction, name, content_type, chunk_size, generation)
    values (p_job, 'out', p_name, p_content_type, p_chunk_size, p_generation)
    returning id into v_id;
    return v_id;
end $$;

-- An output whose saving failed (its chunks raised, or a write did): its
-- chunks go now, not with the job.
create or replace function jobfeed.output_discard(p_job uuid, p_file bigint)
returns void language sql security definer set search_path = jobfeed, pg_temp as $$
    delete from jobfeed.job_files f where f.id = p_file and f.job_id = p_job and f.size is null
$$;

-- Publish an output: fenced by generation (false, and the file dropped, when
-- the attempt has lost the job). It replaces the output of that name, and the
-- job's public list of outputs changes: a new version, announced.
create or replace function jobfeed.output_finish(p_job uuid, p_generation int, p_file bigint, p_size bigint,
                                                 p_now timestamptz default null)
returns boolean language plpgsql security definer set search_path = jobfeed, pg_temp as $$
declare
    v_name text;
    v_ver bigint;
begin
    perform from jobfeed.jobs j
     where j.id = p_job and j.generation = p_generation and j.state::text = 'running'
       for update;
    if not found then
        delete from jobfeed.job_files f where f.id = p_file and f.size is null;
        return false;
    end if;
    select f.name into v_name from jobfeed.job_files f
     where f.id = p_file and f.job_id = p_job and f.direction = 'out' and f.size is null;
    if not found then
        return false;
    end if;
    delete from jobfeed.job_files f
     where f.job_id = p_job and f.direction = 'out' and f.name = v_name and f.size is not null;
    update jobfeed.job_files f set size = p_size where f.id = p_file;
    update jobfeed.jobs j
       set outputs = (select jsonb_agg(jsonb_build_object('name', f.name, 'size', f.size,
                                                          'content_type', f.content_type) order by f.name)
                        from jobfeed.job_files f
                       where f.job_id = p_job and f.direction = 'out' and f.size is not null),
           version = j.version + 1, updated_at = jobfeed.clock(p_now)
     where j.id = p_job
    returning j.version into v_ver;
    perform jobfeed.notify_changed(array[p_job], array[v_ver]);
    return true;
end $$;

-- A job's finished files of one direction ('in' or 'out'), by name.
create or replace function jobfeed.files_of(p_job uuid, p_direction text)
returns table (id bigint, name text, size bigint, content_type text, chunk_size int)
language sql stable security definer set search_path = jobfeed, pg_temp as $$
    select f.id, f.name, f.size, f.content_type, f.chunk_size from jobfeed.job_files f
     where f.job_id = p_job and f.direction = p_direction and f.size is not null
     order by f.name
$$;

-- p_for bytes of chunk p_seq from byte p_from (1-based; substring's). Null
-- when the file is gone (its job deleted, or an output replaced).
create or replace function jobfeed.file_read(p_file bigint, p_seq int, p_from int default 1,
                                             p_for int default 2147483647)
returns bytea language sql stable security definer set search_path = jobfeed, pg_temp as $$
    select substring(c.data from p_from for p_for) from jobfeed.file_chunks c
     where c.file_id = p_file and c.seq = p_seq
$$;
