"""`python -m serve`: the same as `autotune serve`."""

from serve.cli import serve_command

if __name__ == "__main__":
    serve_command(prog_name="python -m serve")
