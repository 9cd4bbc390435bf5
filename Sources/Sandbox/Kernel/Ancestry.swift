@preconcurrency import Glibc
import CSandbox
import SystemPackage

/// Where a folder sits, judged by inodes along "..", as Landlock judges it:
/// symlinks, bind mounts and renames change nothing. Only meaningful while
/// the folders are pinned by open descriptors (ext4 reuses inode numbers).
public enum Ancestry {
    /// The identity of the inode `fd` holds and of every folder above it, up to "/".
    static func chain(of fd: OwnedDescriptor) throws(Errno) -> [InodeIdentity] {
        let status = try fd.status()
        var result = [status.inodeIdentity]
        var current = fd
        if !status.isDirectory {
            // A file has no "..": take the folder the kernel names for it and
            // prove that name still holds this very inode.
            current = try folder(holding: fd, identity: status.inodeIdentity)
            result.append(try current.status().inodeIdentity)
        }
        for _ in 0..<4096 {
            let parent = OwnedDescriptor(taking: try syscallRetrying { csb_open_path(current.rawValue, "..", 0) })
            let identity = try parent.status().inodeIdentity
            if identity == result.last { return result }  // ".." of "/" is "/"
            result.append(identity)
            current = parent
        }
        throw .tooManySymbolicLinkLevels  // a 4,096-deep tree: treat as unresolvable
    }

    private static func folder(holding file: OwnedDescriptor, identity: InodeIdentity) throws(Errno) -> OwnedDescriptor {
        var buffer = [UInt8](repeating: 0, count: Int(PATH_MAX) + 1)
        let length = buffer.withUnsafeMutableBytes { readlink("/proc/self/fd/\(file.rawValue)", $0.baseAddress!.assumingMemoryBound(to: CChar.self), Int(PATH_MAX)) }
        guard length > 0, buffer[0] == UInt8(ascii: "/"), let slash = buffer[0..<length].lastIndex(of: UInt8(ascii: "/")) else {
            throw .noSuchFileOrDirectory  // deleted, or not on a path at all
        }
        let folderPath = slash == 0 ? [UInt8(ascii: "/")] : Array(buffer[0..<slash])
        let leaf = Array(buffer[(slash + 1)..<length])
        let folder = OwnedDescriptor(taking: try syscallRetrying {
            (folderPath + [0]).withUnsafeBufferPointer { csb_openat2_path(AT_FDCWD, UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self), 0) }
        })
        var entry = stat()
        let found = (leaf + [0]).withUnsafeBufferPointer {
            fstatat(folder.rawValue, UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self), &entry, AT_SYMLINK_NOFOLLOW)
        }
        guard found == 0, entry.inodeIdentity == identity else { throw .noSuchFileOrDirectory }
        return folder
    }

    /// Whether `folder` is `other`, holds it, or lies inside it.
    public static func overlaps(_ folder: OwnedDescriptor, _ other: OwnedDescriptor) throws(Errno) -> Bool {
        let mine = try chain(of: folder)
        let theirs = try chain(of: other)
        return mine.contains(theirs[0]) || theirs.contains(mine[0])
    }

    /// Whether `folder` is one of `roots` or lies beneath one.
    public static func isBeneath(_ folder: OwnedDescriptor, anyOf roots: [OwnedDescriptor]) throws(Errno) -> Bool {
        let identities = Set(roots.compactMap { try? $0.status().inodeIdentity })
        return try chain(of: folder).contains { identities.contains($0) }
    }
}
