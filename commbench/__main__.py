"""`python -m commbench` runs the same CLI as the `commbench` console script."""

from commbench.cli import program

if __name__ == "__main__":
    program()
