@preconcurrency import Glibc
import CSyscalls
import SystemPackage

/// Resolves a folder path one component at a time, as the kernel would, but
/// follows a symbolic link only where `LinkTrust` says no app (and no other
/// user) could have put it there to send this unconfined process somewhere
/// else. Each step goes through the descriptor of the step before, so
/// nothing can be swapped in between a check and its use. Paths are bytes:
/// names and link targets need not be UTF-8.
public enum SafeWalk {
    /// `fail` turns a problem (a sentence) into the caller's error.
    public static func openFolder<Failure: Error>(
        _ path: FilePath, trust: LinkTrust, describe fail: (String) -> Failure
    ) throws(Failure) -> OwnedDescriptor {
        var remaining = components(path.bytes).reversed() as [[UInt8]]
        var current = try open([UInt8(ascii: "/")], relativeTo: nil, fail)
        var hops = 0
        while let component = remaining.popLast() {
            if component == [UInt8(ascii: ".")] { continue }
            let shown = Printable.path(bytes: component)
            let next = try open(component, relativeTo: current, fail)
            let st: stat
            do { st = try next.status() } catch { throw fail("\(shown): \(error)") }
            switch st.st_mode & S_IFMT {
            case S_IFDIR:
                current = next
            case S_IFLNK:
                hops += 1
                guard hops <= 40 else { throw fail("too many symbolic links in the path") }
                if let reason = trust.refusal(forLinkIn: current) {
                    throw fail("'\(shown)' in its path is a symbolic link \(reason); "
                        + "it may have been planted to redirect sandboxed-run. Give the real path.")
                }
                guard let target = linkTarget(component, in: current) else { throw fail("\(shown): unreadable link") }
                if target.first == UInt8(ascii: "/") { current = try open([UInt8(ascii: "/")], relativeTo: nil, fail) }
                remaining += components(target).reversed()
            default:
                throw fail("'\(shown)' in its path is not a folder")
            }
        }
        return current
    }

    private static func components(_ bytes: [UInt8]) -> [[UInt8]] {
        bytes.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true).map(Array.init)
    }

    private static func open<Failure: Error>(_ name: [UInt8], relativeTo folder: OwnedDescriptor?, _ fail: (String) -> Failure) throws(Failure) -> OwnedDescriptor {
        do {
            return OwnedDescriptor(taking: try syscallRetrying {
                (name + [0]).withUnsafeBytes { csb_open_path(folder?.rawValue ?? AT_FDCWD, $0.baseAddress!.assumingMemoryBound(to: CChar.self), 0) }
            })
        } catch {
            let shown = Printable.path(bytes: name)
            throw fail(error == .noSuchFileOrDirectory ? "its folder does not exist ('\(shown)' is missing)"
                : error == .permissionDenied ? "\(shown): permission denied (a folder on the path cannot be searched)"
                : "\(shown): \(error)")
        }
    }

    private static func linkTarget(_ name: [UInt8], in folder: OwnedDescriptor) -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: Int(PATH_MAX) + 1)
        let length = buffer.withUnsafeMutableBytes { target in
            (name + [0]).withUnsafeBytes {
                readlinkat(folder.rawValue, $0.baseAddress!.assumingMemoryBound(to: CChar.self), target.baseAddress!.assumingMemoryBound(to: CChar.self), Int(PATH_MAX))
            }
        }
        return length > 0 ? Array(buffer[0..<length]) : nil
    }
}
