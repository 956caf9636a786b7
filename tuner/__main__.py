"""`python -m tuner`: the same as `autotune`."""

from tuner.cli import main

if __name__ == "__main__":
    main(prog_name="autotune")
