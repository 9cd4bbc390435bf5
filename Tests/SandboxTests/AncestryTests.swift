import Foundation
import SystemPackage
import Testing
@testable import Sandbox

/// The ancestry memory that the denial observer keeps across a command's
/// calls: a child can make folders thousands deep, so it must stay linear.
@Suite struct AncestryWalkerTests {
    @Test func deepFoldersAreRememberedOncePerFolderAndChainsStayExact() throws {
        let scratch = Scratch()
        var path = scratch.path
        var folders: [String] = []
        for _ in 0..<400 {
            path += "/d"
            folders.append(path)
        }
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let walker = Ancestry.Walker()
        // Every level asked once, deepest last, as a command descending would be observed.
        for folder in folders {
            let fd = try OwnedDescriptor.openPath(FilePath(folder), follow: false)
            let remembered = walker.chain(of: fd)
            #expect(remembered == (try Ancestry.chain(of: fd)), "a remembered chain differs from a fresh walk at \(folder.count)")
        }
        let depth = path.split(separator: "/").count
        // A chain per folder would keep about depth²/2 identities; a parent per folder keeps depth.
        #expect(walker.remembered <= depth + 1, "remembered \(walker.remembered) for \(depth) folders")
    }
}
