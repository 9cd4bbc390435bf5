import SystemKit
import SystemPackage

/// Why a coordinated read or write did not happen. When one is thrown, the
/// write is not known to be durable: nothing was written, except when the
/// failure was in flushing it to disk (`.system` with operation "flushing…"),
/// where a record may be in the file, whole, but not known to be on disk.
public enum CoordinationError: Error, Equatable, CustomStringConvertible {
    /// A FIFO, device, socket or folder where a regular file should be.
    case notARegularFile(FilePath)
    /// A symbolic link where the item should be: never followed.
    case link(FilePath)
    /// Only the placeholder `.NAME.icloud` is on disk: the file must be downloaded first.
    case placeholder(FilePath)
    /// Another party held the item longer than the timeout.
    case timedOut(FilePath, seconds: Double)
    /// A record for `append` must be one line: no newline, no NUL.
    case notOneLine
    /// `.NAME.sr-journal` is not one this protocol wrote.
    case damagedJournal(FilePath)
    /// A `.NAME.icloud` stub that is not a placeholder's property list.
    case damagedPlaceholder(FilePath)
    /// A journal or placeholder that a party of another version of the
    /// protocol (PROTOCOL.md) wrote: refused rather than read as this version's.
    case otherProtocolVersion(FilePath, version: Int)
    /// No conflict version with that identifier.
    case noSuchVersion(FilePath, String)
    /// A link in the path that an app could have planted, or a missing folder.
    case unsafePath(FilePath, problem: String)
    /// A file or folder at one of the protocol's names beside the item that
    /// someone who may not write the item could have made or written (another
    /// user, in a folder others may create names in): neither believed nor
    /// acted on (PROTOCOL.md, "Who may have written what").
    case untrusted(FilePath, problem: String)
    /// A copy of an evicted item (`.sr2-<hash>.icloud.data`) with no stub to
    /// say which item it is: that name stands for every long name with the hash.
    case unclaimedCopy(FilePath)
    /// Another process swapped the temporary file of a replacement for something else
    /// while the block wrote it; the rename put that in place of the item.
    case interfered(FilePath)
    case system(operation: String, path: FilePath, errno: Errno)

    public var description: String {
        switch self {
        case .notARegularFile(let path):
            "\(Printable.path(path)) is not a regular file (a folder, FIFO, device or socket): nothing was written"
        case .link(let path):
            "\(Printable.path(path)) is a symbolic link, which coordination never follows: name the file itself"
        case .placeholder(let path):
            "\(Printable.path(path)) is not downloaded (only its placeholder is on disk): download it first, or queue the write"
        case .timedOut(let path, let seconds):
            "\(Printable.path(path)) stayed locked by another writer or reader for \(seconds) s: nothing was written; try again"
        case .notOneLine:
            "a record must be one line: it may not contain a newline or NUL"
        case .damagedJournal(let path):
            "\(Printable.path(path)) is not a journal this protocol wrote: inspect it, then delete it"
        case .damagedPlaceholder(let path):
            "\(Printable.path(path)) is not a placeholder stub (a binary property list with NSURLNameKey and NSURLFileSizeKey)"
        case .otherProtocolVersion(let path, let version):
            "\(Printable.path(path)) was written by a party of coordination protocol version \(version); this one speaks version "
                + "\(ItemNames.protocolVersion) (Sources/Coordination/PROTOCOL.md): stop or update that party, then deal with the file "
                + "(a journal: remove it; a placeholder: bring the file back with the party that evicted it)"
        case .noSuchVersion(let path, let identifier):
            "\(Printable.path(path)) has no conflict version '\(Printable.message(identifier))': `sandboxed-run versions list` shows them"
        case .unsafePath(let path, let problem):
            "\(Printable.path(path)): \(problem)"
        case .untrusted(let path, let problem):
            "\(Printable.path(path)) \(problem); coordination neither believes nor acts on what someone who may not write the item "
                + "could have written there, so nothing was changed: inspect it, and have its owner (or root) remove it if nobody needs it"
        case .unclaimedCopy(let path):
            "\(Printable.path(path)) has no placeholder stub beside it to say which item it is a copy of (a name .sr2-<hash> stands for "
                + "every long name with that hash, and for the name sr2-<hash> itself), so it is left as it is: rename it to its item's name "
                + "by hand if no file has that name"
        case .interfered(let path):
            "\(Printable.path(path)) was not replaced with what was written: another process swapped the temporary file "
                + "beside it meanwhile, and the name now holds what that process put there; inspect the folder"
        case .system(let operation, let path, let errno):
            "\(operation) \(Printable.path(path)): \(errno)"
        }
    }
}
