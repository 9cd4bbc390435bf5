@preconcurrency import Glibc
import CSyscalls
import SystemKit
import SystemPackage

/// Who may have written a file the protocol finds at one of its names
/// beside an item (PROTOCOL.md, "Who may have written what"). In a folder
/// where others may create names (a sticky shared folder, like /tmp),
/// another user can put a file of their own at any of those names, though
/// they may not write the item: a journal there would have the item cut,
/// a copy would become the item or one of its versions. The protocol reads
/// or acts on such a file only when a party that may write the item could
/// alone have written it: it is a regular file with one link, its owner is
/// the item's owner or this process's user, and nobody else may write it.
/// Checked on the descriptor or `fstatat` result the caller then acts on.
enum Trust {
    /// Why the protocol must not believe or act on the file whose status is
    /// `status`, beside an item whose status is `item` (nil when no item is
    /// there to compare with: then only this process's own files pass), or
    /// nil when it may. `ownerOnly`: the protocol makes such files 0600 (a
    /// journal), so no group or other write bit is allowed; otherwise the
    /// file may be no more writable than the item.
    static func problem(with status: stat, item: stat?, ownerOnly: Bool = false) -> String? {
        guard status.st_mode & S_IFMT == S_IFREG else { return "is not a regular file" }
        guard status.st_nlink == 1 else {
            return "has \(status.st_nlink) links (a hard link can make a file someone else controls look like the protocol's)"
        }
        let me = geteuid()
        if status.st_uid != me && status.st_uid != item?.st_uid {
            let owner = item.map { "the item's owner (uid \($0.st_uid))" } ?? "the owner of an item beside it"
            return "is owned by uid \(status.st_uid), neither \(owner) nor this process's user (uid \(me)): another user may have put it there"
        }
        if ownerOnly ? status.st_mode & 0o022 != 0 : writableBeyond(status, item) {
            return "may be written by others than those who may write the item (mode \(String(status.st_mode & 0o7777, radix: 8)))"
        }
        return nil
    }

    /// Whether users who may not write the item (or, with no item, anyone
    /// but the owner) may write the file. A POSIX ACL's named entries show
    /// in the group bits (they are its mask), so the bits tell.
    static func writableBeyond(_ status: stat, _ item: stat?) -> Bool {
        let others = status.st_mode & 0o002 != 0 && (item.map { $0.st_mode & 0o002 == 0 } ?? true)
        let group = status.st_mode & 0o020 != 0 && (item.map { $0.st_mode & 0o020 == 0 || $0.st_gid != status.st_gid } ?? true)
        return others || group
    }

    /// Why a folder the protocol keeps files in (the versions folders) must
    /// not be used, or nil: its owner is one of `owners`; it is no more
    /// writable than `parent`, the item's folder (nobody could have put or
    /// swapped a file there who could not do so in the item's folder); and
    /// it has no default ACL, which every file made in it would inherit.
    static func folderProblem(_ folder: OwnedDescriptor, owners: [uid_t], parent: stat) -> String? {
        guard let status = try? folder.status() else { return "cannot be examined" }
        guard owners.contains(status.st_uid) else {
            let allowed = owners.reduce(into: [uid_t]()) { if !$0.contains($1) { $0.append($1) } }
            return "is owned by uid \(status.st_uid), who is not one of those allowed to keep this item's versions "
                + "(uid \(allowed.map(String.init).joined(separator: ", uid "))): another user may have made it to read or remove them"
        }
        let writable = status.st_mode & 0o022
        if writable & ~(parent.st_mode & 0o022) != 0 || writable != 0 && parent.st_mode & S_ISVTX != 0 && status.st_mode & S_ISVTX == 0 {
            return "may be written by others than those who may write the item's folder (mode \(String(status.st_mode & 0o7777, radix: 8)))"
        }
        switch AccessControl.read(AccessControl.defaults, of: folder.rawValue) {
        case .none: return nil
        case .list: return "has a default ACL, which every version kept in it would inherit"
        case .unknown: return "has a default ACL that cannot be read"
        }
    }

    /// The item's status: the item, or while it is evicted its copy or its stub
    /// (both keep its owner), nil when none is there.
    static func itemStatus(_ location: FileCoordinator.Location) -> stat? {
        for name in [location.name, ItemNames.sibling(.data, of: location.name), ItemNames.sibling(.placeholder, of: location.name)] {
            var status = stat()
            if fstatat(location.folder.rawValue, name, &status, AT_SYMLINK_NOFOLLOW) == 0 { return status }
        }
        return nil
    }

    /// Throws `.untrusted` when the protocol's file at `sibling` must not be believed (see `problem`).
    static func check(_ sibling: FileCoordinator.Location, item: stat?, ownerOnly: Bool = false) throws {
        var status = stat()
        guard fstatat(sibling.folder.rawValue, sibling.name, &status, AT_SYMLINK_NOFOLLOW) == 0 else { return }
        if let problem = problem(with: status, item: item, ownerOnly: ownerOnly) {
            throw CoordinationError.untrusted(sibling.path, problem: problem)
        }
    }
}
