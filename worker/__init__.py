"""jobfeed's queue side: database access, migrations, handlers, runner, sweeper, CLI."""
