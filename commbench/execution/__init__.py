"""How benches run: the launcher's torch (torch_host), one torchrun per launch watched for crashes and hangs
(launch, forked_torchrun), the session from prepared run folders to verdicts (session), the rank driver and its
process group (driver, distributed), and the signals that end a run (stopping)."""
