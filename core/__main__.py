"""`python -m lavin` runs the command line interface."""

from lavin.cli import main

if __name__ == "__main__":
    main(prog_name="lavin")
