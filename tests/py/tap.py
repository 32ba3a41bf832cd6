"""Tiny TAP producer for the Python test suites (tests/run.sh counts "ok " / "not ok " lines,
and "... # SKIP reason" as skipped).

    t = Tap()
    t.ok(cond, "name", diag="shown as '# ...' lines when the test fails")
    t.skip("name", "why it cannot run here")
    t.diag("free-form note")
    t.done()   # prints 1..N, exits 1 if anything failed
"""
import sys
import traceback


class Tap:
    def __init__(self, out=None):
        self.out = out or sys.stdout
        self.n = 0
        self.failed = 0

    def _print(self, line):
        self.out.write(line + "\n")
        self.out.flush()

    def diag(self, text):
        for line in str(text).splitlines() or [""]:
            self._print("# " + line)

    def ok(self, cond, name, diag=None):
        self.n += 1
        name = " ".join(str(name).split())  # one line, no leading '#'
        if cond:
            self._print("ok %d - %s" % (self.n, name))
        else:
            self.failed += 1
            self._print("not ok %d - %s" % (self.n, name))
            if diag is not None:
                self.diag(diag)
        return bool(cond)

    def skip(self, name, reason):
        """A test that cannot run here: "ok N - name # SKIP reason" (neither passed nor failed)."""
        self.n += 1
        name = " ".join(str(name).split()).replace("#", "")
        self._print("ok %d - %s # SKIP %s" % (self.n, name, " ".join(str(reason).split())))

    def run(self, name, fn, *args, **kwargs):
        """Call fn; an exception counts as a failure (with its traceback as diagnostics).
        fn's return value is passed back (None on failure)."""
        try:
            return fn(*args, **kwargs)
        except Exception:
            self.ok(False, name, traceback.format_exc())
            return None

    def done(self):
        self._print("1..%d" % self.n)
        sys.exit(1 if self.failed or self.n == 0 else 0)
