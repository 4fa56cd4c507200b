"""What the commands run: each command of commbench/cli/ parses its options and calls one function here (or in the
package that owns its domain), which does the work (starts the torch host, resolves, launches, writes the run set)
and returns a result for the command to print. Nothing here prints a table or decides how stdout looks."""
