// docs/staging.md:118, copied by scripts/doc-snippets: edit the doc, then run it.
// Compiled with the products AppSandbox, as a user's package that depends on them.
import AppSandbox

func keepNotesOnly(app: AppID, session: SandboxSession) throws {
    for review in try session.stagedReviews(app: app) {
        let notes = try review.changes().filter { $0.path.starts(with: Array("notes/".utf8)) }
        for outcome in try review.accept(notes.map(\.path)) where outcome.result != .applied {
            print("not applied as staged: \(outcome.change.hostPath(in: review.path)): \(outcome.result)")
        }
        _ = try review.reject()  // the rest
    }
}
