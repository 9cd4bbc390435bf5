// Staged grants (issue #32; design: docs/staging.md). A read-write grant
// launched with review gets a clone of its folder in the broker's state,
// bound in the folder's place; what the command changed is the difference
// between the clone and the manifest written when it was made, and stays
// there until the person accepts it (applied as a coordinated writer) or
// rejects it.
@_exported import Grants
