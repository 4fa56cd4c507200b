"""`commbench replay`: a traced training step's collectives run again on the current job (plan.py reads the traces
in the launching process; rank.py replays on every rank; rows.py and table.py are its rows and terminal table)."""
