import SystemKit
import SystemPackage

/// Why the broker could not grant, list, revoke or write: what went wrong
/// and what to do. Resolution outcomes are not errors: see `BookmarkStatus`.
public enum GrantError: Error, Equatable, CustomStringConvertible, Sendable {
    case folderNotFound(String)
    case notADirectory(String)
    /// The folder's path is longer than PATH_MAX: it can be walked to, but
    /// not named, so it cannot be granted (see `PathLimit`).
    case pathTooLong(String)
    /// The folder holds, or lies inside, sandboxed-run's own state or containers.
    case protectedFolder(folder: String, protected: String)
    /// The folders above the folder could not be walked (it may not be
    /// searched), so that it is apart from the protected folders is unproven.
    case unprovenFolder(folder: String, protected: String, errno: Errno)
    /// The folder is, or holds, a kernel interface (procfs, sysfs, cgroups...).
    case kernelInterface(folder: String, at: String, type: String)
    /// The filesystem gives no file handle, so replacement could not be told apart.
    case noFolderIdentity(folder: String, errno: Errno)
    case stateDirectory(step: String, errno: Errno)
    /// Something in the state folder (or a folder above it) that another
    /// user made, can change or can read: using it could mean using their keys.
    case untrustedState(path: String, problem: String, fix: String)
    /// The state is incomplete or damaged: going on would lose grants.
    case damagedState(path: String, problem: String, fix: String)
    /// The ledger was written by a newer sandboxed-run.
    case ledgerTooNew(path: String, version: Int, understood: Int)
    /// The command needs to write the state, and it is read-only.
    case readOnlyState(path: String, needed: String)
    /// The ledger itself could not be opened, read or written.
    case ledger(String)
    /// `revoke --grant PREFIX`: no grant's id starts with it (a lookup, not a ledger failure).
    case noSuchGrant(prefix: String)
    /// `revoke --grant PREFIX`: several grants' ids start with it.
    case ambiguousGrant(prefix: String, matches: Int)
    /// A grant of the launch was revoked while the launch was under way: nothing was started.
    case revokedDuringLaunch(grant: GrantID, path: String)
    /// `revoke` could write the revocation neither into the ledger nor into
    /// the revocation reserve (full, or missing): nothing was revoked.
    /// `named`: the grants it would have revoked (their holders may be ended).
    case revocationNotRecorded(problem: String, fix: String, named: Set<GrantID> = [])
    case keyring(String)
    case bookmarkFile(path: String, problem: String)
    /// `--grant` was not NAME=FILE.
    case grantSpecification(String)
    case cancelled

    public var description: String {
        switch self {
        case .folderNotFound(let path):
            "no folder at \(path): check the path, or pick it again"
        case .notADirectory(let path):
            "\(path) is not a folder: grants are for folders"
        case .pathTooLong(let path):
            "cannot grant \(path): \(PathLimit.exceeded). Pick a folder with a shorter path."
        case .protectedFolder(let folder, let protected):
            "cannot grant \(folder): it would expose sandboxed-run's own \(protected) (keys, ledger or other apps' containers). Pick a folder that neither holds nor lies inside it."
        case .unprovenFolder(let folder, let protected, let errno):
            "cannot grant \(folder): whether it holds or lies inside sandboxed-run's own \(protected) could not be checked, because the folders above it could not be walked from it (\(errno)). "
                + "Let this user search it (`chmod u+x \(folder)`), or pick another folder."
        case .kernelInterface(let folder, let at, let type):
            "cannot grant \(folder): \(at == folder ? "it is" : "\(at) beneath it is") the kernel's \(type), not data: a command there could "
                + "read every process of the machine, and as root change the kernel's settings. Pick a folder of files."
        case .noFolderIdentity(let folder, let errno):
            "cannot grant \(folder): its filesystem gives no file handle (\(errno)), so a replaced folder could not be told from the original"
        case .stateDirectory(let step, let errno):
            "the grant state could not be used: \(step) failed: \(errno). Check $XDG_STATE_HOME/sandboxed-run (or ~/.local/state/sandboxed-run)."
        case .untrustedState(let path, let problem, let fix):
            "refusing the grant state: \(path) \(problem). \(fix)"
        case .damagedState(let path, let problem, let fix):
            "the grant state is damaged: \(path) \(problem). \(fix)"
        case .ledgerTooNew(let path, let version, let understood):
            "\(path): ledger schema \(version) is newer than this sandboxed-run understands (\(understood)): upgrade sandboxed-run"
        case .readOnlyState(let path, let needed):
            "the grant state at \(path) is read-only, and \(needed) needs to write it: make it writable (`chmod u+w \(path)`), or use a command that only reads"
        case .ledger(let problem):
            "the grant ledger failed: \(problem)"
        case .noSuchGrant(let prefix):
            "no grant has an id starting with \(prefix): see `sandboxed-run grants list`"
        case .ambiguousGrant(let prefix, let matches):
            "\(matches) grants have ids starting with '\(prefix)': give more digits (see `sandboxed-run grants list`)"
        case .revokedDuringLaunch(let grant, let path):
            "grant \(grant) of \(path) was revoked while the launch was under way: nothing was started"
        case .revocationNotRecorded(let problem, let fix, _):
            "nothing was revoked: \(problem). \(fix)"
        case .keyring(let problem):
            "the broker's keys failed: \(problem)"
        case .bookmarkFile(let path, let problem):
            "bookmark \(path): \(problem)"
        case .grantSpecification(let spec):
            "'\(spec)' is not NAME=FILE, NAME of letters, digits and _ (for example VAULT=vault.bookmark)"
        case .cancelled:
            "cancelled: no folder was granted"
        }
    }
}
