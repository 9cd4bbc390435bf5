@preconcurrency import Glibc
import CSyscalls
import SystemKit
import SystemPackage

/// A walk of a folder tree that follows no link, opens nothing but folders
/// as folders (O_NOFOLLOW | O_DIRECTORY), goes at most `depthLimit` deep
/// (a deeper tree is an error, never a crash or a descriptor per level
/// without end), and lists each folder's names sorted, so that every walk
/// of the same tree meets it in the same order.
struct TreeWalk {
    /// The deepest staging follows: far beyond any folder a person keeps,
    /// and well within the descriptors a process has.
    static let depthLimit = 256

    struct Entry {
        /// The folder the entry is in (valid during the call).
        let parent: CInt
        let name: [UInt8]
        /// Relative to the walk's root, names joined by "/".
        let path: [UInt8]
        let status: stat
        var kind: ItemKind { ItemKind(mode: status.st_mode) }
    }

    private struct Frame<Context> {
        let folder: OwnedDescriptor
        let path: [UInt8]
        let names: [[UInt8]]
        var next = 0
        let entry: Entry?
        let context: Context
    }

    /// Visits every entry below `root` (not `root` itself), parents before
    /// their contents. `visit` returns the context for a folder's contents
    /// to descend into it, nil to skip it; `leave` runs once a folder's
    /// contents are done (with nil for the root).
    static func walk<Context>(
        _ root: OwnedDescriptor, context: Context, limit: Int = depthLimit,
        visit: (Entry, Context) throws(StagingError) -> Context?,
        leave: (Entry?, OwnedDescriptor, Context) throws(StagingError) -> Void = { _, _, _ in }
    ) throws(StagingError) {
        var stack = [Frame(folder: root, path: [], names: try names(in: root, path: []), entry: nil, context: context)]
        while !stack.isEmpty {
            let top = stack.count - 1
            guard stack[top].next < stack[top].names.count else {
                let done = stack.removeLast()
                try leave(done.entry, done.folder, done.context)
                continue
            }
            let name = stack[top].names[stack[top].next]
            stack[top].next += 1
            let folder = stack[top].folder
            let path = stack[top].path.isEmpty ? name : stack[top].path + [UInt8(ascii: "/")] + name
            var status = stat()
            let found = name.withCString { fstatat(folder.rawValue, $0, &status, AT_SYMLINK_NOFOLLOW) }
            if found != 0 {
                if errno == ENOENT { continue }
                throw .system(step: "reading", path: path, errno: Errno(rawValue: errno))
            }
            let entry = Entry(parent: folder.rawValue, name: name, path: path, status: status)
            guard let inner = try visit(entry, stack[top].context), entry.kind == .folder else { continue }
            guard stack.count <= limit else { throw .tooDeep(path: path, limit: limit) }
            let opened = try openFolder(name, in: folder, path: path)
            stack.append(Frame(folder: opened, path: path, names: try names(in: opened, path: path), entry: entry, context: inner))
        }
    }

    /// `name` in `folder` as a folder for reading, never through a link.
    static func openFolder(_ name: [UInt8], in folder: OwnedDescriptor, path: [UInt8]) throws(StagingError) -> OwnedDescriptor {
        do {
            return try OwnedDescriptor.openFolder(name, relativeTo: folder, follow: false, use: .read)
        } catch {
            throw .system(step: "opening the folder", path: path, errno: error)
        }
    }

    /// `name` in `folder`, O_PATH, the link itself if it is one.
    static func openItem(_ name: [UInt8], in folder: CInt, path: [UInt8]) throws(StagingError) -> OwnedDescriptor {
        do {
            return OwnedDescriptor(taking: try syscallRetrying { name.withCString { csb_open_path(folder, $0, 0) } })
        } catch {
            throw .system(step: "opening", path: path, errno: error)
        }
    }

    /// The names in `folder`, sorted by their bytes, without "." and "..".
    static func names(in folder: OwnedDescriptor, path: [UInt8]) throws(StagingError) -> [[UInt8]] {
        let listing: OwnedDescriptor
        let stream: OpaquePointer
        do {
            listing = try folder.reopenedFolder()
            stream = try directoryStream(taking: listing)
        } catch {
            throw .system(step: "listing", path: path, errno: error)
        }
        defer { closedir(stream) }
        var names: [[UInt8]] = []
        while true {
            errno = 0
            guard let entry = readdir(stream) else {
                if errno != 0 { throw .system(step: "listing", path: path, errno: Errno(rawValue: errno)) }
                break
            }
            let raw = withUnsafeBytes(of: entry.pointee.d_name) { Array($0.prefix { $0 != 0 }) }
            if raw == [0x2E] || raw == [0x2E, 0x2E] { continue }
            names.append(raw)
        }
        return names.sorted { $0.lexicographicallyPrecedes($1) }
    }
}

extension Array where Element == UInt8 {
    /// The bytes as a C string, for a name that holds no NUL (the kernel's names never do).
    func withCString<T>(_ body: (UnsafePointer<CChar>) -> T) -> T {
        (self + [0]).withUnsafeBufferPointer { body(UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self)) }
    }
}
