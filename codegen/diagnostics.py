"""Diagnostics: every problem names file:line, the field and what is wrong."""


class IdlError(Exception):
    def __init__(self, path, line, field, message):
        super().__init__(message)
        self.path = path
        self.line = line
        self.field = field
        self.message = message

    def __str__(self):
        where = "%s:%d" % (self.path, self.line) if self.line else self.path
        field = " %s:" % self.field if self.field else ""
        return "%s: error:%s %s" % (where, field, self.message)


class Diagnostics:
    """Collects errors and warnings so one run reports all of them."""

    def __init__(self, path):
        self.path = path
        self.errors = []
        self.warnings = []

    def error(self, line, field, message):
        self.errors.append(IdlError(self.path, line, field, message))

    def warning(self, line, field, message):
        where = "%s:%d" % (self.path, line) if line else self.path
        field = " %s:" % field if field else ""
        self.warnings.append("%s: warning:%s %s" % (where, field, message))
