"""jobfeed's HTTP side: the JSON API, the SSE feeds and the web UI's files."""
