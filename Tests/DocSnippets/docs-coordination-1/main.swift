// docs/coordination.md:11, copied by scripts/doc-snippets: edit the doc, then run it.
// Compiled with the products Coordination, as a user's package that depends on them.
import Coordination

// One whole line, durably, into a note that a sync daemon also rewrites.
try FileCoordinator().append(line: Array("- buy milk".utf8), to: "/home/ada/Notes/inbox.md")
