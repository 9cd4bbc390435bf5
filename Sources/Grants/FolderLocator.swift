@preconcurrency import Glibc
import CSandbox
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

    func locate(_ identity: FolderIdentity, near originalPath: FilePath) -> (OwnedDescriptor, FilePath, LocateMethod)? {
        if useFileHandles, !identity.handleIsFID, let found = openByHandle(identity, near: originalPath) {
            return (found.0, found.1, .fileHandle)
        }
        return search(identity, near: originalPath)
    }

    /// The nearest folder above `path` that still exists, then its parents.
    private func existingAncestors(of path: FilePath) -> [FilePath] {
        var result: [FilePath] = []
        var candidate = path
        while candidate.bytes != [UInt8(ascii: "/")], !candidate.isEmpty {
            candidate = candidate.removingLastComponent()
            var st = stat()
            if candidate.withPlatformString({ stat($0, &st) }) == 0, (st.st_mode & S_IFMT) == S_IFDIR { result.append(candidate) }
        }
        return result
    }

    private func openByHandle(_ identity: FolderIdentity, near originalPath: FilePath) -> (OwnedDescriptor, FilePath)? {
        // Any directory on the same filesystem serves as the mount fd; it
        // must be opened for reading (an O_PATH fd gives EBADF).
        for ancestor in existingAncestors(of: originalPath) {
            let raw = ancestor.withPlatformString { open($0, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
            guard raw >= 0 else { continue }
            let mount = OwnedDescriptor(taking: raw)
            guard let st = try? mount.status(), UInt64(st.st_dev) == identity.device else { continue }
            var handle = identity.fileHandle
            let fd = csb_open_by_handle(mount.rawValue, &handle)
            guard fd >= 0 else { return nil }  // EPERM without the capability, ESTALE when deleted
            let folder = OwnedDescriptor(taking: fd)
            guard let path = folder.currentPath else { return nil }
            return (folder, path)
        }
        return nil
    }

    /// Breadth-first from the old parent outwards, never crossing into
    /// another filesystem or following symlinks. Names are taken as bytes.
    private func search(_ identity: FolderIdentity, near originalPath: FilePath) -> (OwnedDescriptor, FilePath, LocateMethod)? {
        var visited = 0
        var seen = Set<FilePath>()
        for root in existingAncestors(of: originalPath) {
            var queue = [root]
            var index = 0
            while index < queue.count {
                let folder = queue[index]
                index += 1
                guard seen.insert(folder).inserted else { continue }
                visited += 1
                if visited > searchLimit { return nil }
                guard let fd = try? OwnedDescriptor.openPath(folder, follow: false),
                      let st = try? fd.status(), (st.st_mode & S_IFMT) == S_IFDIR, UInt64(st.st_dev) == identity.device else { continue }
                if let candidate = try? FolderIdentity.of(fd, path: folder), candidate.isSameFolder(as: identity) {
                    return (fd, folder, .boundedSearch(visited: visited))
                }
                for entry in (try? directoryEntries(folder)) ?? [] where entry.isDirectory {
                    queue.append(FilePath(bytes: folder.bytes + (folder.bytes == [UInt8(ascii: "/")] ? [] : [UInt8(ascii: "/")]) + entry.rawName))
                }
            }
        }
        return nil
    }
}
