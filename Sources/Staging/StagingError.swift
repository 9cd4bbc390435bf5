@preconcurrency import Glibc
import Grants
import SystemKit
import SystemPackage

/// Why staged changes could not be made, read, applied or thrown away.
/// Every case says what to do; nothing is half-applied without saying so.
public enum StagingError: Error, CustomStringConvertible, Sendable {
    /// The broker's state could not be used.
    case state(GrantError)
    /// Another sandbox, or a review, holds this grant's staged changes now.
    case busy(grant: String)
    /// A system call failed on a path of the staging area or the grant.
    case system(step: String, path: [UInt8], errno: Errno)
    /// A file the staging area keeps is not what this version writes.
    case damaged(file: String, problem: String)
    /// A tree deeper than the walk follows (a folder in a folder... `limit` times).
    case tooDeep(path: [UInt8], limit: Int)
    /// The granted folder holds something staging cannot copy faithfully.
    case cannotStage(path: [UInt8], reason: String)
    /// `review` was asked about an app with nothing staged.
    case nothingStaged(app: String)
    /// A path given to `accept` or `reject` names no staged change.
    case noSuchChange(path: [UInt8])
    /// The grant no longer leads to its folder (revoked, moved, replaced,
    /// covered...): nothing is applied until the person picks it again.
    case grantUnusable(grant: String, status: String, message: String)

    public var description: String {
        switch self {
        case .state(let error):
            return error.description
        case .busy(let grant):
            return "the staged changes of grant \(grant) are in use by another sandbox or review: wait for it to end, then try again (two staged runs of one grant never share a staging area)"
        case .system(let step, let path, let errno):
            return "\(step) \(Printable.path(bytes: path)) failed: \(errno) (errno \(errno.rawValue))"
        case .damaged(let file, let problem):
            return "the staging area's \(file) is damaged (\(problem)): nothing was changed; `sandboxed-run review reject` throws the staged changes away"
        case .tooDeep(let path, let limit):
            return "\(Printable.path(bytes: path)) is nested more than \(limit) folders deep: staging follows no deeper, and nothing was changed; `sandboxed-run review reject` throws such a tree away"
        case .cannotStage(let path, let reason):
            return "cannot stage \(Printable.path(bytes: path)): \(reason); nothing was launched"
        case .nothingStaged(let app):
            return "app \(app) has no staged changes"
        case .noSuchChange(let path):
            return "\(Printable.path(bytes: path)) is not a staged change: `sandboxed-run review list` names them"
        case .grantUnusable(let grant, let status, let message):
            // Picking the folder again makes another grant, which never sees
            // these changes: only following a move keeps the grant.
            let next = switch status {
            case "moved": "run the app once more with --review --on-stale follow to reconnect this grant to its folder, then accept them; or reject them"
            case "revoked", "replaced", "wrong-app", "invalid": "they can never be applied (a folder picked again is another grant): reject them"
            default: "they can be applied once the grant leads to its folder again; or reject them"
            }
            return "grant \(grant) is \(status) (\(message)): nothing was applied. The staged changes are kept: \(next)"
        }
    }
}
