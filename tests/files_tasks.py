"""Kinds for tests/test_files_outputs.py's end-to-end run (loaded by a worker process
with JOBFEED_TASKS=files_tasks): a parent splits its uploaded video into 8
slices, a child per slice transforms its slice, the parent merges their outputs."""

from jobfeed import task

PARTS = 8
INVERT = bytes(255 - b for b in range(256))  # the "analysis": every byte inverted


@task("clip", lease=30)
async def clip(job, ctx):
    if job.children is None:  # first run: split
        [video] = [i for i in await ctx.list_inputs() if i["name"] == "video"]
        step = -(-video["size"] // PARTS)
        parts = [await ctx.submit("clip_part", f"{job.target}/{n}",
                                  {"parent": str(job.id), "start": n * step,
                                   "end": min(video["size"], (n + 1) * step)})
                 for n in range(PARTS)]
        return ctx.wait_for(parts)

    async def merged():  # then merge, in order
        for child in job.children:
            async for chunk in ctx.open_output(child["id"], "part"):
                yield chunk
    await ctx.save_output("merged.bin", merged(), "application/octet-stream")
    return {"parts": len(job.children)}


@task("clip_part", lease=30)
async def clip_part(job, ctx):
    p = job.payload

    async def inverted():
        async for chunk in ctx.open_input("video", p["start"], p["end"], job_id=p["parent"]):
            yield chunk.translate(INVERT)
    await ctx.save_output("part", inverted())
    return {"bytes": p["end"] - p["start"]}
