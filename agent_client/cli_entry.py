"""`python -m agent_client.cli_entry …` runs the `mnemosync` command (used where no script is on PATH)."""

from agent_client.cli import main

if __name__ == "__main__":
    main()
