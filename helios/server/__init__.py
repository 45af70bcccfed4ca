"""The HTTP server (host side): an OpenAI-compatible API over one ModelRuntime.

`helios.server.app.create_app` builds the FastAPI app; `helios.server.serve` composes a core, its
runtime and the app and runs uvicorn (what `helios serve` does).
"""
