"""`python -m pdscaler` is the same as the `pdscaler` command."""

from pdscaler.cli import main

if __name__ == "__main__":
    main()
