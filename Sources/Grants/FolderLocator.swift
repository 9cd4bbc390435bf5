@preconcurrency import Glibc
import CSyscalls
import Sandbox
import SystemPackage

/// Finds a folder by identity after it moved: by file handle when the
/// process may (`open_by_handle_at` needs CAP_DAC_READ_SEARCH), otherwise
/// by a bounded search around where it was, each candidate confirmed by
/// its file handle.
struct FolderLocator {
    /// How many folders the search may look at before giving up.
    var searchLimit = 20_000
    /// Set false to test the search where the capability is present.
    var useFileHandles = true

    /// What looking for the folder found.
    enum Located {
        /// The folder, and the path the kernel has for it (which may be hidden by a mount: check).
        case found(OwnedDescriptor, FilePath, LocateMethod)
        /// Its own filesystem answered that the handle names nothing any more: deleted.
        case gone
        /// Found, but deeper than the kernel can name (`PathLimit`): no path leads there.
        case tooLong(LocateMethod)
        case notFound
    }

    func locate(_ identity: FolderIdentity, near originalPath: FilePath) -> Located {
        if useFileHandles, !identity.handleIsFID {
            switch openByHandle(identity, near: originalPath) {
            case .notFound: break
            case let answer: return answer
            }
        }
        return search(identity, near: originalPath) ?? .notFound
    }

    /// The nearest folder above `path` that still exists, then its parents.
    func existingAncestors(of path: FilePath) -> [FilePath] {
        var result: [FilePath] = []
        var candidate = path
        while candidate.bytes != [UInt8(ascii: "/")], !candidate.isEmpty {
            candidate = candidate.removingLastComponent()
            var st = stat()
            if candidate.withPlatformString({ stat($0, &st) }) == 0, (st.st_mode & S_IFMT) == S_IFDIR { result.append(candidate) }
        }
        return result
    }

    /// Any folder of the same filesystem serves as the mount fd. Its st_dev
    /// need not be the folder's: on btrfs every subvolume has its own, and
    /// the handle names the subvolume. A folder on another filesystem of the
    /// same type may decode the handle into something else: what opens is
    /// kept only if its identity is the folder's.
    private func openByHandle(_ identity: FolderIdentity, near originalPath: FilePath) -> Located {
        for ancestor in existingAncestors(of: originalPath) {
            // Opened for reading: an O_PATH fd as the mount fd gives EBADF.
            guard let mount = try? OwnedDescriptor.openFolder(ancestor, follow: false, use: .read) else { continue }
            guard identity.hasFilesystemType(of: mount) else { continue }
            var handle = identity.fileHandle
            let fd = csb_open_by_handle(mount.rawValue, &handle)
            guard fd >= 0 else {
                let code = errno
                if code == EPERM { return .notFound }  // no CAP_DAC_READ_SEARCH: search instead
                if code == ESTALE || code == ENOENT, identity.mayShareFilesystem(with: mount) { return .gone }
                continue
            }
            let folder = OwnedDescriptor(taking: fd)
            guard let found = try? FolderIdentity.of(folder, path: ancestor), found.isSameFolder(as: identity) else { continue }
            do {
                return .found(folder, FilePath(bytes: try FilePath.kernelPath(ofDescriptor: folder.rawValue)), .fileHandle)
            } catch {
                // Deleted while something still holds it open, or moved beyond PATH_MAX: no path leads there.
                return error == .fileNameTooLong ? .tooLong(.fileHandle) : .gone
            }
        }
        return .notFound
    }

    /// `path` opened from "/" one name at a time, no link followed.
    private static func openByNames(_ path: FilePath) -> OwnedDescriptor? {
        var current = try? OwnedDescriptor.openFolder([UInt8(ascii: "/")], follow: false)
        for name in path.bytes.split(separator: UInt8(ascii: "/")) {
            current = current.flatMap { try? OwnedDescriptor.openFolder(Array(name), relativeTo: $0, follow: false) }
        }
        return current
    }

    /// Breadth-first from the old parent outwards, never following symlinks
    /// or leaving the mount it starts on (btrfs subvolumes, which are not
    /// mounts, are crossed). Only folders that may be on the folder's
    /// filesystem are starting points. Names are taken as bytes.
    private func search(_ identity: FolderIdentity, near originalPath: FilePath) -> Located? {
        var visited = 0
        var seen = Set<FilePath>()
        for root in existingAncestors(of: originalPath) {
            guard let start = try? OwnedDescriptor.openPath(root, follow: false), identity.mayShareFilesystem(with: start),
                  let mount = MountFacts.of(start)?.mountID else { continue }
            var queue = [root]
            var index = 0
            while index < queue.count {
                let folder = queue[index]
                index += 1
                guard seen.insert(folder).inserted else { continue }
                visited += 1
                if visited > searchLimit { return nil }
                // Beyond PATH_MAX a path opens only one name at a time (and is
                // listed through its descriptor): found there, it is too deep to grant.
                let named = folder.bytes.count < PathLimit.bytes
                guard let fd = named ? try? OwnedDescriptor.openPath(folder, follow: false) : Self.openByNames(folder),
                      let st = try? fd.status(), (st.st_mode & S_IFMT) == S_IFDIR, MountFacts.of(fd)?.mountID == mount else { continue }
                if let candidate = try? FolderIdentity.of(fd, path: folder), candidate.isSameFolder(as: identity) {
                    return named ? .found(fd, folder, .boundedSearch(visited: visited)) : .tooLong(.boundedSearch(visited: visited))
                }
                let listed = named ? folder : FilePath("/proc/self/fd/\(fd.rawValue)")
                for entry in (try? directoryEntries(listed)) ?? [] where entry.isDirectory {
                    queue.append(FilePath(bytes: folder.bytes + (folder.bytes == [UInt8(ascii: "/")] ? [] : [UInt8(ascii: "/")]) + entry.rawName))
                }
            }
        }
        return nil
    }
}
