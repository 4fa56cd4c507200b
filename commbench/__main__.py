"""`python -m commbench` runs the same CLI as the `commbench` console script."""

from commbench.cli import main

if __name__ == "__main__":
    main()
