@preconcurrency import Glibc
import Sandbox
import SystemPackage

/// A file evicted by a sync service: only its stub `.NAME.icloud` is on
/// disk, as iCloud Drive shows one on a Mac.
public enum Placeholder {
    /// Refuses to write `name` when only its placeholder exists: writing
    /// would make a new file that the service's download then conflicts with.
    static func refuseIfEvicted(_ name: [CChar], in folder: OwnedDescriptor, path: FilePath) throws {
        var status = stat()
        guard fstatat(folder.rawValue, name, &status, AT_SYMLINK_NOFOLLOW) != 0, errno == ENOENT else { return }
        if fstatat(folder.rawValue, FileCoordinator.sibling(of: name, suffix: ".icloud"), &status, AT_SYMLINK_NOFOLLOW) == 0 {
            throw CoordinationError.placeholder(path)
        }
    }
}
