"""The HTTP server (host side): an OpenAI-compatible API over one ModelRuntime.

`helios.server.app.create_app` builds the FastAPI app over a `ServerState` (state.py: a runtime and
its frontend preparer); `helios.server.serve` runs it with uvicorn. What is served is composed by
`helios.cli.compose` (what `helios serve` does): the server imports neither runtime.
"""
