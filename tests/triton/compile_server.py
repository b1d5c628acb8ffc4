"""One compiling process for the PTX tests (tests/triton/test_ptx_report.py): torch, Triton and the port's compile
report are imported once, then each snippet runs in a child forked from it, so that a snippet's changes to a module
(a patched sm_count, say) never reach the next one, and no snippet pays the imports again.

Protocol: one JSON line in ({"code": ...}), one JSON line out ({"returncode", "stdout", "stderr"}), until stdin closes.

    python tests/triton/compile_server.py '<prelude>'
"""

import json
import os
import sys
import tempfile
import traceback


def _run_forked(code: str, namespace: dict) -> dict:
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:  # the child: its own copy of every module, its output in the two files
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            sys.stdout = sys.__stdout__  # fd 1, now the child's output file
            status = 0
            try:
                exec(code, dict(namespace))
            except SystemExit as e:
                status = e.code if isinstance(e.code, int) else 1
            except BaseException:
                traceback.print_exc()
                status = 1
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
        _, wait_status = os.waitpid(pid, 0)
        out.seek(0)
        err.seek(0)
        return {
            "returncode": os.waitstatus_to_exitcode(wait_status),
            "stdout": out.read().decode(errors="replace"),
            "stderr": err.read().decode(errors="replace"),
        }


def serve(prelude: str) -> None:
    namespace: dict = {}
    exec(prelude, namespace)
    replies = sys.stdout
    sys.stdout = sys.stderr  # anything the parent prints stays off the reply channel
    for line in sys.stdin:
        replies.write(json.dumps(_run_forked(json.loads(line)["code"], namespace)) + "\n")
        replies.flush()


if __name__ == "__main__":
    serve(sys.argv[1])
