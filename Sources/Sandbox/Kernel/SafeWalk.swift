@preconcurrency import Glibc
import CSandbox
import SystemPackage

/// Resolves a folder path one component at a time, as the kernel would, but
/// refuses to follow a symlink that lies in a folder the app can write: the
/// app could have put it there to send the launcher somewhere else. Symlinks
/// elsewhere (`/home` -> `/var/home`, say) are the user's and are followed.
public enum SafeWalk {
    /// `fail` turns a problem (a sentence) into the caller's error.
    public static func openFolder<Failure: Error>(
        _ path: String, untrusted: [OwnedDescriptor], describe fail: (String) -> Failure
    ) throws(Failure) -> OwnedDescriptor {
        try openFolder(bytes: Array(path.utf8), untrusted: untrusted, describe: fail)
    }

    /// The same for a path as the kernel's bytes (a folder's name need not be UTF-8).
    public static func openFolder<Failure: Error>(
        _ path: FilePath, untrusted: [OwnedDescriptor], describe fail: (String) -> Failure
    ) throws(Failure) -> OwnedDescriptor {
        try openFolder(bytes: path.bytes, untrusted: untrusted, describe: fail)
    }

    private static func openFolder<Failure: Error>(
        bytes path: [UInt8], untrusted: [OwnedDescriptor], describe fail: (String) -> Failure
    ) throws(Failure) -> OwnedDescriptor {
        var remaining = Array(components(path).reversed())
        var current = try open([UInt8(ascii: "/")], relativeTo: nil, fail)
        var hops = 0
        while let component = remaining.popLast() {
            if component == [UInt8(ascii: ".")] { continue }
            let next = try open(component, relativeTo: current, fail)
            let st: stat
            do { st = try next.status() } catch { throw fail("\(display(component)): \(error)") }
            switch st.st_mode & S_IFMT {
            case S_IFDIR:
                current = next
            case S_IFLNK:
                hops += 1
                guard hops <= 40 else { throw fail("too many symbolic links in the path") }
                if (try? Ancestry.isBeneath(current, anyOf: untrusted)) != false {
                    throw fail("'\(display(component))' in its path is a symbolic link inside a folder the app can write; "
                        + "it may have been planted to redirect sandboxed-run. Give the real path.")
                }
                guard let target = linkTarget(component, in: current) else { throw fail("\(display(component)): unreadable link") }
                if target.first == UInt8(ascii: "/") { current = try open([UInt8(ascii: "/")], relativeTo: nil, fail) }
                remaining += components(target).reversed()
            default:
                throw fail("'\(display(component))' in its path is not a folder")
            }
        }
        return current
    }

    private static func components(_ path: [UInt8]) -> [[UInt8]] {
        path.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true).map(Array.init)
    }

    /// A name as the messages show it: as it is when it is UTF-8, escaped bytes otherwise.
    private static func display(_ name: [UInt8]) -> String {
        String(validating: name, as: UTF8.self) ?? Printable.path(bytes: name)
    }

    private static func open<Failure: Error>(_ name: [UInt8], relativeTo folder: OwnedDescriptor?, _ fail: (String) -> Failure) throws(Failure) -> OwnedDescriptor {
        do {
            return OwnedDescriptor(taking: try syscallRetrying {
                (name.map { CChar(bitPattern: $0) } + [0]).withUnsafeBufferPointer { csb_open_path(folder?.rawValue ?? AT_FDCWD, $0.baseAddress!, 0) }
            })
        } catch {
            throw fail(error == .noSuchFileOrDirectory ? "its folder does not exist ('\(display(name))' is missing)" : "\(display(name)): \(error)")
        }
    }

    private static func linkTarget(_ name: [UInt8], in folder: OwnedDescriptor) -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: Int(PATH_MAX) + 1)
        let length = buffer.withUnsafeMutableBytes { target in
            (name.map { CChar(bitPattern: $0) } + [0]).withUnsafeBufferPointer {
                readlinkat(folder.rawValue, $0.baseAddress!, target.baseAddress!.assumingMemoryBound(to: CChar.self), Int(PATH_MAX))
            }
        }
        return length > 0 ? Array(buffer[0..<length]) : nil
    }
}
