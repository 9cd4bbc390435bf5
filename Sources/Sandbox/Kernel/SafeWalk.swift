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
        var remaining = path.split(separator: "/", omittingEmptySubsequences: true).map(String.init).reversed() as [String]
        var current = try open("/", relativeTo: nil, fail)
        var hops = 0
        while let component = remaining.popLast() {
            if component == "." { continue }
            let next = try open(component, relativeTo: current, fail)
            let st: stat
            do { st = try next.status() } catch { throw fail("\(component): \(error)") }
            switch st.st_mode & S_IFMT {
            case S_IFDIR:
                current = next
            case S_IFLNK:
                hops += 1
                guard hops <= 40 else { throw fail("too many symbolic links in the path") }
                if (try? Ancestry.isBeneath(current, anyOf: untrusted)) != false {
                    throw fail("'\(component)' in its path is a symbolic link inside a folder the app can write; "
                        + "it may have been planted to redirect sandboxed-run. Give the real path.")
                }
                guard let target = linkTarget(component, in: current) else { throw fail("\(component): unreadable link") }
                if target.hasPrefix("/") { current = try open("/", relativeTo: nil, fail) }
                remaining += target.split(separator: "/").map(String.init).reversed()
            default:
                throw fail("'\(component)' in its path is not a folder")
            }
        }
        return current
    }

    private static func open<Failure: Error>(_ name: String, relativeTo folder: OwnedDescriptor?, _ fail: (String) -> Failure) throws(Failure) -> OwnedDescriptor {
        do {
            return OwnedDescriptor(taking: try syscallRetrying { csb_open_path(folder?.rawValue ?? AT_FDCWD, name, 0) })
        } catch {
            throw fail(error == .noSuchFileOrDirectory ? "its folder does not exist ('\(name)' is missing)" : "\(name): \(error)")
        }
    }

    private static func linkTarget(_ name: String, in folder: OwnedDescriptor) -> String? {
        var buffer = [UInt8](repeating: 0, count: Int(PATH_MAX) + 1)
        let length = buffer.withUnsafeMutableBytes { readlinkat(folder.rawValue, name, $0.baseAddress!.assumingMemoryBound(to: CChar.self), Int(PATH_MAX)) }
        return length > 0 ? String(decoding: buffer[0..<length], as: UTF8.self) : nil
    }
}
